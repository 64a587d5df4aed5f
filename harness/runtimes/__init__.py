"""runtimes"""
