"""What a job is: its spec as the scheduler sees it, its state, the rule that settles its progress, the file a user submits."""
