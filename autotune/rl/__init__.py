"""Reinforcement learning over pass orderings: the gymnasium environment and policy training."""
