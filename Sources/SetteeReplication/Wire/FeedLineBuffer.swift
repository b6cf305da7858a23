/// Splits a continuous `_changes` body into lines as its chunks arrive. A peer chooses the bytes, so an
/// unfinished line is held only up to `maxLineBytes` (`ReplicationLimits.maxChangesLineBytes`) and a longer
/// line fails the feed; each byte is scanned for the line feed once (`scanned` remembers where the last scan
/// stopped), so a line sent in many chunks costs time linear in its length, not quadratic.
struct FeedLineBuffer {
    let maxLineBytes: Int
    /// Bytes received and not yet handed out: finished lines from `start`, then the unfinished one.
    private var bytes: [UInt8] = []
    /// Where the next line starts in `bytes`.
    private var start = 0
    /// Bytes from `start` up to here hold no line feed.
    private var scanned = 0
    /// Bytes looked at for a line feed so far: the body's length at most, however it was cut into chunks.
    private(set) var bytesScanned = 0

    init(maxLineBytes: Int) {
        self.maxLineBytes = maxLineBytes
    }

    /// Bytes held: the lines of the last chunk not yet taken, and the unfinished line.
    var heldBytes: Int { bytes.count - start }

    /// Adds a chunk of the body. Throws when the line left unfinished after it would be longer than
    /// `maxLineBytes`; the chunk is then not kept.
    mutating func append(_ chunk: some BidirectionalCollection<UInt8>) throws(ReplicationError) {
        if start > 0 {
            // Drop the lines already handed out: what is copied is the unfinished line, at most one bound.
            bytes.removeSubrange(0..<start)
            scanned -= start
            start = 0
        }
        let unfinished: Int
        if let lastLF = chunk.lastIndex(of: 0x0A) {
            unfinished = chunk.distance(from: chunk.index(after: lastLF), to: chunk.endIndex)
        } else {
            unfinished = bytes.count + chunk.count
        }
        guard unfinished <= maxLineBytes else { throw Self.tooLong(maxLineBytes) }
        bytes.append(contentsOf: chunk)
    }

    /// The next finished line without its line feed, or nil until a chunk finishes one. Throws when the line
    /// is longer than `maxLineBytes` (a chunk can hold a whole one).
    mutating func nextLine() throws(ReplicationError) -> ArraySlice<UInt8>? {
        guard let lf = bytes[scanned...].firstIndex(of: 0x0A) else {
            bytesScanned += bytes.count - scanned
            scanned = bytes.count
            return nil
        }
        bytesScanned += lf + 1 - scanned
        guard lf - start <= maxLineBytes else { throw Self.tooLong(maxLineBytes) }
        let line = bytes[start..<lf]
        start = lf + 1
        scanned = start
        return line
    }

    static func tooLong(_ limit: Int) -> ReplicationError {
        .badResponse("continuous _changes line longer than \(limit) bytes (ReplicationLimits.maxChangesLineBytes)")
    }
}
