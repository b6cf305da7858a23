import Logging
import Synchronization

/// A `LogHandler` that keeps every record it is given, for tests of what a component logs (levels, messages,
/// metadata) without a real backend.
package final class CapturedLog: Sendable {
    package struct Record: Sendable {
        package var level: Logger.Level
        package var message: String
        /// Metadata values as text (the handler's own metadata merged with the record's).
        package var metadata: [String: String]
    }

    private let records = Mutex<[Record]>([])

    package init() {}

    /// Every record so far, oldest first.
    package var all: [Record] { records.withLock { $0 } }

    /// Takes every record so far, oldest first, and forgets them: the next call returns only what came after.
    package func take() -> [Record] {
        records.withLock { r in
            defer { r = [] }
            return r
        }
    }

    /// The records whose message is `message`.
    package func records(_ message: String) -> [Record] { all.filter { $0.message == message } }

    /// A logger writing here, at `level` and above.
    package func logger(level: Logger.Level = .trace) -> Logger {
        var l = Logger(label: "settee.test.captured") { _ in Handler(log: self) }
        l.logLevel = level
        return l
    }

    fileprivate func append(_ r: Record) { records.withLock { $0.append(r) } }

    private struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            log.append(
                Record(level: event.level, message: event.message.description, metadata: merged.mapValues { "\($0)" }))
        }
    }
}
