"""How a job's process runs: offline switches, the warm interpreter that forks a local run's jobs, progress in the job log."""
