"""Step 5 of the pipeline: bind entries to their shipped artifacts at run time."""
