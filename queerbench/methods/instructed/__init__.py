"""``instructed``: a chat model is asked for the word; its replies are parsed and labelled."""
