"""The mLSTM: its float form for training (`mlstm`), its exact integer-valued form for coding
(`exact`, with the compiled `step_kernels` and `update_kernels`), and the dynamic-evaluation update
rules in float (`adapt`). Imports `config`, `format` and the base."""
