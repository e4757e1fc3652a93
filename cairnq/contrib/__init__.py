"""Integrations with frameworks, each an optional extra (``cairnq.contrib.django``:
the ``django`` extra). Nothing here is imported by cairnq itself."""
