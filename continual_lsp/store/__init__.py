from continual_lsp.config import default_store_path
from continual_lsp.store.db import Store, StoreError, new_id

__all__ = ["Store", "StoreError", "default_store_path", "new_id"]
