"""The exact byte statistics beside the network and the mixer that weighs them (`mix`, with the
compiled `mix_kernels`). Imports `network`, `config` and the base."""
