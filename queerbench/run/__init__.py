"""The run pipeline: options and signature, the output folder, prediction saved in parts, scoring and the outputs."""
