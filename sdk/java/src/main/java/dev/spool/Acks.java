package dev.spool;

/** When a publish returns (docs/semantics.md, "Replication"). */
public enum Acks {
  /**
   * The default: once the messages are committed, on disk on a quorum of the
   * partition's replicas. An acknowledged message is not lost while a quorum
   * survives.
   */
  ALL,
  /**
   * Once the messages are on disk on the partition's leader, before the
   * other replicas have them: faster, and lossy in a cluster (lost if that
   * leader fails before a follower has them). On a single sidecar, the same
   * as ALL.
   */
  LEADER;

  dev.spool.v1.Acks proto() {
    // ACKS_UNSPECIFIED is ALL, also for a sidecar that predates the field.
    return this == LEADER ? dev.spool.v1.Acks.ACKS_LEADER : dev.spool.v1.Acks.ACKS_UNSPECIFIED;
  }
}
