"""Installed pretrained models (*.dcm) and their cards (*.md); installed as `dyncompress.models`."""
