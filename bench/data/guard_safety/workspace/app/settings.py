import os

DEBUG = os.environ.get("DEBUG", "0") == "1"
DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///dev.db")
TIMEOUT_S = 30
