import logging

logger = logging.getLogger(__name__)


def send_mail(client, to, body):
    client.send(to, body)
