from continual_lsp.store.db import Store, StoreError, new_id

__all__ = ["Store", "StoreError", "new_id"]
