/// Why a registry operation did not happen. Operating errors only.
public enum RegistryError: Error, Equatable, Sendable {
    /// A bucket with that name exists (or is being created).
    case alreadyExists
    /// No bucket with that name.
    case notFound
    /// `Limits.maxBuckets` buckets exist already.
    case tooMany
    /// Flush was asked of a bucket created without `flushEnabled`.
    case flushDisabled
    /// Unusable admin credentials (the message says why).
    case invalidCredentials(String)
    /// The metadata file exists but cannot be trusted (bad checksum, bad JSON, unknown format).
    case corruptMetadata(String)
    /// A file-system call failed.
    case io(String)
    /// The bucket engine refused (open, flush).
    case engine(String)
    /// Another registry (this process or another) holds the data directory.
    case dataDirectoryInUse(String)
    /// `shutdown()` was called; the registry no longer changes anything.
    case shutDown
    /// The bucket is gone from the metadata, but its files could not all be removed yet; the next start
    /// removes them.
    case deletionIncomplete(String)
    /// The node metadata file is missing while bucket data exists: the node refuses to start (the message
    /// says what to do); nothing is deleted.
    case metadataMissing(String)
    /// The next cluster epoch or revision would pass `Limits.maxClusterEpoch` / `maxConfigRevision`: nothing was
    /// committed.
    case limitReached(String)
    /// An argument outside what the operation accepts (the message names it); nothing was changed. Callers validate
    /// first (`BucketValidation`); this keeps a missed check an error, not a trap.
    case invalidArgument(String)
}
