"""Policy backends behind one protocol (base.py); `factory.py` builds the configured one."""
