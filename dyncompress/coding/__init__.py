"""The coding loop and what drives it: the predictor the loop talks to (`predictor`), the loop
itself (`codec`), the range coder (`coder`), the split of lanes over threads (`split`), frames in
worker processes (`parallel`), measuring without writing (`measure`) and compiling ahead (`warm`).
Imports `experts`, `network`, `config`, `format` and the base."""
