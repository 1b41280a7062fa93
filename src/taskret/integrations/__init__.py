"""Adapters to other libraries (optional dependencies): ``taskret.integrations.langchain``."""
