"""What a coding is made of: its settings and levels (`settings`), the network's shape (`shape`) and
the pretrained model files (`model`). Imports only `format` and the package's base."""
