from continual_lsp.store.db import Store, StoreError, default_store_path, new_id

__all__ = ["Store", "StoreError", "default_store_path", "new_id"]
