"""The mLSTM: its float form for training (`mlstm`), its exact integer-valued form for coding
(`exact`, the network; `exact_adapt`, its update rules; `fixed`, the number formats, the checked
tables and the coded frequencies; with the compiled `step_kernels`, `update_kernels` and
`int_kernels`), and the dynamic-evaluation update rules in float (`adapt`). Imports `config`,
`format` and the base."""
