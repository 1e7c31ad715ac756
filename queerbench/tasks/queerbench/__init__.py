"""QueerBench (Sosto & Barrón-Cedeño): its templates and subjects, the paper's own files, and its two tasks
(``default`` and ``paper``)."""
