"""MISGENDERED (Hossain, Dev & Singh, ACL 2023): pronoun use after a declaration, as a ``requests`` task."""
