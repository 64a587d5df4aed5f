"""Root conftest: nothing here yet beyond making the checkout importable; the certify
plugin is loaded through its ``pytest11`` entry point (``certify.plugin``)."""
