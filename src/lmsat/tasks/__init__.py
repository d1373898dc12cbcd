"""lm-eval task YAML templates (`*.yaml.in`) that `lmsat.saturation.downstream` fills and writes out.

They are templates, not tasks: their data paths are placeholders, and their suffix keeps
lm-eval's TaskManager from indexing this directory. `write_offline_tasks` and
`write_storycloze_task` load one, fill `dataset_kwargs.data_files` with absolute paths and
write `<task>.yaml` into a directory that is then passed as `include_path`.
"""
