"""The command line: the commands (`main`), their shared options (`base`), the measuring commands
(`measure`), many files at once (`batch`) and the peers `bench` runs beside (`peers`). The top:
imports anything below it."""
