"""Sample project whose entry cannot be exported: data-dependent Python control flow."""
