import logging

logger = logging.getLogger(__name__)


def remove_stale(paths):
    for path in paths:
        path.unlink()
