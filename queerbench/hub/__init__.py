"""The Hugging Face Hub pieces: the dataset folder, the release of dataset, metric and Space, and the Space app."""
