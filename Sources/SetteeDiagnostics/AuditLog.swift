import Dispatch
import Foundation
import Logging
import SetteeCore
import SetteeJSON
import Synchronization

/// The one audit sink of a process: `record` appends an event to a bounded queue and returns (a request never waits
/// for disk); one writer thread takes the queue in batches and appends them to `AuditFileWriter`'s files, which
/// rotate by size and interval (ADR 0148).
///
/// Invariants:
/// 1. Nothing is queued while the settings say `auditdEnabled: false`, name the event's id in `disabled` or its user in
///    `disabledUsers` (`AuditSettings.records`).
/// 2. At most `queueCapacity` (`Limits.auditQueueEvents`) events wait; an event past it is dropped and counted in
///    `droppedEvents` (the metric); the writer then writes one `eventsDropped` record with the count it has not
///    reported yet, and logs a warning.
/// 3. Only the writer thread touches the files.
///
/// `AuditLog.inMemory()` keeps records as lines in memory instead (tests of the handlers that emit events).
public final class AuditLog: Sendable {
    private struct State {
        var settings: AuditSettings
        /// The directory the writer writes to (the settings' `logPath`, or the node's default).
        var directory: String?
        var queue: [String] = []
        /// Drops not yet reported by an `eventsDropped` record.
        var unreportedDrops = 0
        var stopped = false
        /// Whether the writer holds a batch it took from the queue and has not written yet.
        var writing = false
        /// Whether the writer thread runs (it starts with the first queued event: a process that never audits, and
        /// every test registry, holds no thread).
        var writerStarted = false
        /// The memory destination's lines.
        var memory: [String] = []
    }

    private let state: Mutex<State>
    private let wake = DispatchSemaphore(value: 0)
    private let writerDone = DispatchSemaphore(value: 0)
    private let dropped = Atomic<Int>(0)
    private let written = Atomic<Int>(0)
    private let inMemory: Bool
    private let autoStart: Bool
    private let defaultDirectory: String?
    private let queueCapacity: Int
    private let clock: any WallClock
    private let logger: Logger

    /// A log writing to `defaultDirectory` (or the settings' `logPath`) with its own writer thread, started with the
    /// first event queued. `startWriter: false` leaves the queue to `drainOnce()` (tests of the bound).
    public init(
        defaultDirectory: String, settings: AuditSettings = AuditSettings(), clock: any WallClock = SystemWallClock(),
        queueCapacity: Int = Limits.auditQueueEvents, logger: Logger = Logger(label: "settee.audit"),
        startWriter: Bool = true
    ) {
        self.inMemory = false
        self.defaultDirectory = defaultDirectory
        self.queueCapacity = queueCapacity
        self.clock = clock
        self.logger = logger
        self.autoStart = startWriter
        self.state = Mutex(State(settings: settings, directory: settings.logPath ?? defaultDirectory))
    }

    private init(inMemory settings: AuditSettings, clock: any WallClock) {
        self.inMemory = true
        self.autoStart = false
        self.defaultDirectory = nil
        self.queueCapacity = Limits.auditQueueEvents
        self.clock = clock
        self.logger = Logger(label: "settee.audit")
        self.state = Mutex(State(settings: settings, directory: nil))
    }

    /// A log keeping its records in memory (`lines`), enabled unless `settings` say otherwise.
    public static func inMemory(
        settings: AuditSettings = AuditSettings(auditdEnabled: true), clock: any WallClock = SystemWallClock()
    ) -> AuditLog {
        AuditLog(inMemory: settings, clock: clock)
    }

    /// A log that writes nothing (its settings stay disabled until `apply`): what a process without an audit
    /// directory holds.
    public static func disabled() -> AuditLog { AuditLog(inMemory: AuditSettings(), clock: SystemWallClock()) }

    /// The settings in force.
    public var settings: AuditSettings { state.withLock { $0.settings } }

    /// The directory the writer writes `audit.log` to (nil for a memory log).
    public var directory: String? { state.withLock { $0.directory } }

    /// Events dropped because the queue was full or the file could not be written, since the process started.
    public var droppedEvents: Int { dropped.load(ordering: .relaxed) }

    /// Records written to a file since the process started.
    public var writtenEvents: Int { written.load(ordering: .relaxed) }

    /// A memory log's records, one JSON object each, oldest first.
    public var lines: [String] { state.withLock { $0.memory } }

    /// Puts `settings` in force (the cluster document changed). The next batch goes to the new directory.
    public func apply(_ settings: AuditSettings) {
        let fallback = defaultDirectory
        state.withLock {
            $0.settings = settings
            $0.directory = settings.logPath ?? fallback
        }
        wake.signal()
    }

    /// Stamps `event` with the clock's time and queues it (a memory log keeps it at once). Never blocks on disk.
    public func record(_ event: AuditEvent) {
        let enabled = state.withLock { $0.settings.records(event.kind, user: event.user) }
        guard enabled else { return }
        let line = String(
            decoding: event.record(timestamp: AuditTimestamp.iso8601(nanoseconds: clock.nowNanoseconds()))
                .serialized(), as: UTF8.self)
        let capacity = queueCapacity
        let memory = inMemory
        let autoStart = self.autoStart
        let (queued, start) = state.withLock { s -> (Bool, Bool) in
            if memory {
                if s.memory.count >= capacity { s.memory.removeFirst() }
                s.memory.append(line)
                return (true, false)
            }
            guard s.queue.count < capacity, !s.stopped else {
                s.unreportedDrops += 1
                return (false, false)
            }
            s.queue.append(line)
            let start = autoStart && !s.writerStarted
            if start { s.writerStarted = true }
            return (true, start)
        }
        if start {
            let thread = Thread { [self] in self.runWriter() }
            thread.name = "settee-audit"
            thread.start()
        }
        if queued {
            if !memory { wake.signal() }
        } else {
            dropped.add(1, ordering: .relaxed)
        }
    }

    /// Stops the writer after it wrote what is queued (process shutdown), waiting at most `timeout`.
    public func shutdown(timeout: Duration = .seconds(5)) {
        let running = state.withLock { s in
            s.stopped = true
            return s.writerStarted
        }
        guard running else { return }
        wake.signal()
        let ms = Int(timeout.components.seconds * 1000)
        _ = writerDone.wait(timeout: .now() + .milliseconds(ms))
    }

    /// Writes what is queued now, on the caller's thread (the writer thread's step; tests call it with
    /// `startWriter: false`). Returns how many records it wrote.
    @discardableResult
    public func drainOnce(into writer: inout AuditFileWriter) -> Int {
        let (batch, drops, settings, directory) = state.withLock { s in
            let b = s.queue
            s.queue.removeAll(keepingCapacity: true)
            let d = s.unreportedDrops
            s.unreportedDrops = 0
            s.writing = true
            return (b, d, s.settings, s.directory)
        }
        defer { state.withLock { $0.writing = false } }
        guard let directory else { return 0 }
        if directory != writer.directory { writer = AuditFileWriter(directory: directory) }
        var lines = batch
        let now = clock.nowNanoseconds()
        if drops > 0 {
            logger.warning(
                "audit events dropped: the writer's queue was full", metadata: ["dropped": "\(drops)"])
            let report = AuditEvent(.eventsDropped, fields: [("count", .int(drops))])
            lines.append(
                String(
                    decoding: report.record(timestamp: AuditTimestamp.iso8601(nanoseconds: now)).serialized(),
                    as: UTF8.self))
        }
        if lines.isEmpty {
            if writer.isDue(now: now, rotateInterval: settings.rotateInterval) { try? writer.rotate(now: now) }
            return 0
        }
        do {
            try writer.write(lines, now: now, rotateSize: settings.rotateSize, rotateInterval: settings.rotateInterval)
            written.add(lines.count, ordering: .relaxed)
            return lines.count
        } catch {
            dropped.add(lines.count, ordering: .relaxed)
            logger.error(
                "audit log not written", metadata: ["error": "\(error)", "dropped": "\(lines.count)"])
            return 0
        }
    }

    /// Blocks until the queue is empty (tests; a process's shutdown uses `shutdown`). Call off the cooperative pool.
    public func waitUntilWritten(timeout: Duration = .seconds(10)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if state.withLock({ $0.queue.isEmpty && $0.unreportedDrops == 0 && !$0.writing }) { return true }
            wake.signal()
            Thread.sleep(forTimeInterval: 0.01)
        }
        return false
    }

    private func runWriter() {
        var writer = AuditFileWriter(directory: state.withLock { $0.directory } ?? "")
        while true {
            // Woken by a record, or once a second to rotate an idle file whose interval passed.
            _ = wake.wait(timeout: .now() + .seconds(1))
            drainOnce(into: &writer)
            if state.withLock({ $0.stopped && $0.queue.isEmpty }) { break }
        }
        writerDone.signal()
    }
}
