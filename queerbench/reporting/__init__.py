"""Reporting: the figures' visual language (:mod:`.figures`), the report tables (:mod:`.tables`) and a run's report text
(:mod:`.report`). Plain data in, markdown and PNG out; a task adds its own sections through its hooks.
"""
