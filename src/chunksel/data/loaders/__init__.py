"""One reader per benchmark dataset; :mod:`chunksel.data.datasets` merges their sources.

Each module exposes ``SOURCES``: an ordered mapping ``source name -> reader(root)`` where
``reader`` returns a list of :class:`Record` (a question with its native-id-based id and,
when the source ships them, its own candidate passages). Deduplication, id aliasing and
split assignment happen in :mod:`chunksel.data.datasets`.
"""
