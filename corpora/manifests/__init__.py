"""Corpus manifests (*.json): where a public corpus comes from, its checksum and its splits.

Installed as `dyncompress.corpora`; `dyncompress corpus list` shows them.
"""
