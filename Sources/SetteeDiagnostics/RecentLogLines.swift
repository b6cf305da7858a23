import Logging
import SetteeCore
import Synchronization

/// The last `Limits.recentLogLines` log lines of the process, kept in memory for `GET /logs` and logs collection (a
/// node's standard error goes wherever its operator sent it; this is what the node can hand over itself).
///
/// Lines are formatted as `StreamLogHandler` writes them (time, level, label, metadata, message); wrap the handler in
/// `LineSafeLogHandler` so each stays one line. User data in them is already marked `<ud>` by `LogText`.
public final class RecentLogLines: Sendable {
    /// The process's ring: the one its log bootstrap writes into (settee-server) and `/logs` and logs collection
    /// read. Empty in a process that does not bootstrap it.
    public static let process = RecentLogLines()

    private let ring: Mutex<(lines: [String], next: Int)>
    private let capacity: Int
    private let clock: any WallClock

    public init(capacity: Int = Limits.recentLogLines, clock: any WallClock = SystemWallClock()) {
        self.capacity = max(1, capacity)
        self.clock = clock
        self.ring = Mutex(([], 0))
    }

    /// Keeps `line`, forgetting the oldest past the capacity.
    public func append(_ line: String) {
        let capacity = self.capacity
        ring.withLock { r in
            if r.lines.count < capacity {
                r.lines.append(line)
            } else {
                r.lines[r.next] = line
                r.next = (r.next + 1) % capacity
            }
        }
    }

    /// The kept lines, oldest first.
    public var lines: [String] {
        ring.withLock { r in Array(r.lines[r.next...]) + Array(r.lines[..<r.next]) }
    }

    /// A handler writing into this ring (bootstrap it beside the standard error one, `MultiplexLogHandler`).
    public func handler(label: String) -> Handler { Handler(label: label, sink: self) }

    /// The `LogHandler` that formats an entry and appends it to its ring.
    public struct Handler: LogHandler {
        let label: String
        let sink: RecentLogLines
        public var metadata: Logger.Metadata = [:]
        public var logLevel: Logger.Level = .info
        public var metadataProvider: Logger.MetadataProvider?

        public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        public func log(event: LogEvent) {
            var merged = metadata
            if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
            if let own = event.metadata { merged.merge(own) { _, new in new } }
            let meta =
                merged.isEmpty
                ? "" : " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            let time = AuditTimestamp.iso8601(nanoseconds: sink.clock.nowNanoseconds())
            sink.append("\(time) \(event.level) \(label) :\(meta) \(event.message)")
        }
    }
}
