"""Methods: the ways of filling a blank (``mlm``, ``scored``, ``instructed``), one typed predictor interface over the
model backends, looked up by name."""
