"""Step 3 of the pipeline: compile every entry for every target (run in a child process)."""
