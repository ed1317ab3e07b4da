"""The .dc container: header, blocks, frame index, end marker, checksums (`container`; the spec is
docs/FORMAT.md). Imports only the package's base (`errors`)."""
