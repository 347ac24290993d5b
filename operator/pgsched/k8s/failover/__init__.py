"""After a database failover: what the lost WAL took, put right from the Jobs.

The API server keeps what the database may have lost with asynchronous replication.
``restoration`` restores runs whose rows were lost entirely from their Jobs;
``revalidation`` then compares every run the lost commits could have touched with its
Job, once (docs/operations.md, "What a failover can lose").
"""
