"""PLACEHOLDER (skeleton): subscriptions and events."""

Event = Subscription = subscribe = None
