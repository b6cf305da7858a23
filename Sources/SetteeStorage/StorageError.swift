import SetteeCore

/// A stored record failed verification on its way back from disk: its checksum or its decompressed
/// length does not match what the flusher recorded. Carries no document body, only where it was.
public struct StorageCorruptionError: Error, Sendable, Equatable, CustomStringConvertible {
    public var vbucket: VBucketID
    public var keyLength: Int
    public var reason: String

    public init(vbucket: VBucketID, keyLength: Int, reason: String) {
        self.vbucket = vbucket
        self.keyLength = keyLength
        self.reason = reason
    }

    public var description: String { "corrupt record in \(vbucket) (key length \(keyLength)): \(reason)" }
}

/// Opening or warming up a bucket's files failed (I/O, SQLite, or corruption).
public struct StorageOpenError: Error, Sendable, CustomStringConvertible {
    public var message: String
    /// The file holds no Settee data at all (zero-length, truncated, another program's): what repair may move aside.
    public var notSetteeData: Bool
    public init(_ message: String, notSetteeData: Bool = false) {
        self.message = message
        self.notSetteeData = notSetteeData
    }
    public var description: String { message }
}
