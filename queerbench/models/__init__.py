"""Models: what a model reference is and how it loads.

The one registry of model references (:mod:`.registry`: a Hub id, a folder, ``embedded:…`` or an endpoint, resolved to a
backend), the one fingerprint (:mod:`.fingerprint`), the one device rule (:mod:`.device`), memory checks
(:mod:`.memory`), the masked-LM engine (:mod:`.masked`) and the generation layer (:mod:`.generation`).
"""
