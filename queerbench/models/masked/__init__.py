"""The masked-LM engine: top-k fill-in with a masked LM, its vocabulary rules, and the check against the paper's
prediction CSVs."""
