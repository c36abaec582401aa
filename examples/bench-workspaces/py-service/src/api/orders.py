import logging

logger = logging.getLogger(__name__)


def cancel_order(db, order_id):
    db.update("orders", order_id, status="cancelled")
