"""What a run produces, registered by name: metrics, tables and their files, report pages, the published run."""
