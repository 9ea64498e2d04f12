"""Step 4 of the pipeline: the setuptools plugin that puts artifacts into the wheel."""
