import Foundation
import SetteeCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The audit log's files in one directory: `audit.log` (the live file, appended to) and the rotated
/// `audit-<UTC time>.log` files, at most `Limits.auditRetainedFiles` of them (the oldest removed first).
///
/// Owned by one thread, `AuditLog`'s writer (never a request's): every call may block on disk. Rotation is
/// decided here from the sizes and times it is given, so tests drive it with a manual time.
public final class AuditFileWriter {
    /// The live file's name.
    public static let liveName = "audit.log"

    public let directory: String
    private var fd: Int32 = -1
    /// Bytes in the live file.
    public private(set) var size = 0
    /// When the live file was opened (ns since the epoch): an interval rotation counts from here.
    private var openedAt: UInt64 = 0

    public init(directory: String) {
        self.directory = directory
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    public var livePath: String { directory + "/" + Self.liveName }

    /// Appends `lines` (each one record, without its newline) at time `now` (ns since the epoch), renaming the live
    /// file aside first when a line would take it past `rotateSize` bytes (0: never by size) or it is older than
    /// `rotateInterval` seconds. Throws the `errno` text of a failed open, write or rename.
    public func write(_ lines: [String], now: UInt64, rotateSize: Int, rotateInterval: Int) throws {
        for line in lines {
            var bytes = Array(line.utf8)
            bytes.append(0x0A)
            try openIfNeeded(now: now)
            let tooBig = rotateSize > 0 && size > 0 && size + bytes.count > rotateSize
            if tooBig || isDue(now: now, rotateInterval: rotateInterval) {
                try rotate(now: now)
                try openIfNeeded(now: now)
            }
            try append(bytes)
        }
    }

    /// Whether the live file, not empty, is older than `rotateInterval` seconds at `now`.
    public func isDue(now: UInt64, rotateInterval: Int) -> Bool {
        size > 0 && fd >= 0 && rotateInterval > 0 && now >= openedAt
            && now - openedAt >= UInt64(rotateInterval) * 1_000_000_000
    }

    /// Renames the live file to `audit-<time>.log` (a new name each time) and removes rotated files past
    /// `Limits.auditRetainedFiles`; the next write opens a new live file.
    public func rotate(now: UInt64) throws {
        if fd >= 0 {
            close(fd)
            fd = -1
        }
        let stamp = AuditTimestamp.iso8601(nanoseconds: now).replacingOccurrences(of: ":", with: "-")
        var target = directory + "/audit-" + stamp + ".log"
        var n = 1
        while FileManager.default.fileExists(atPath: target) {
            target = directory + "/audit-" + stamp + "-\(n).log"
            n += 1
        }
        if FileManager.default.fileExists(atPath: livePath), rename(livePath, target) != 0 {
            throw AuditWriteError(message: "rename \(livePath): \(String(cString: strerror(errno)))")
        }
        size = 0
        let rotated = rotatedFiles()
        for name in rotated.dropLast(Limits.auditRetainedFiles) {
            try? FileManager.default.removeItem(atPath: directory + "/" + name)
        }
    }

    /// The rotated files' names, oldest first (their UTC times sort as text).
    public func rotatedFiles() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasPrefix("audit-") && $0.hasSuffix(".log") }.sorted()
    }

    private func openIfNeeded(now: UInt64) throws {
        guard fd < 0 else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let opened = open(livePath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard opened >= 0 else {
            throw AuditWriteError(message: "open \(livePath): \(String(cString: strerror(errno)))")
        }
        fd = opened
        var st = stat()
        size = fstat(opened, &st) == 0 ? Int(st.st_size) : 0
        openedAt = now
    }

    private func append(_ bytes: [UInt8]) throws {
        var written = 0
        let fd = self.fd
        let failure: Int32? = bytes.withUnsafeBytes { raw -> Int32? in
            guard let base = raw.baseAddress else { return nil }
            while written < raw.count {
                let n = Glibc.write(fd, base + written, raw.count - written)
                if n < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                written += n
            }
            return nil
        }
        size += written
        if let failure {
            throw AuditWriteError(message: "write \(livePath): \(String(cString: strerror(failure)))")
        }
    }
}

/// A failed audit file operation (the `errno` text); the writer logs it and counts the lines as dropped.
public struct AuditWriteError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// Audit record times: ISO 8601 in UTC with milliseconds (`2026-11-30T03:59:01.123Z`), computed from the clock's
/// nanoseconds without a formatter (no locale, no shared state).
public enum AuditTimestamp {
    public static func iso8601(nanoseconds: UInt64) -> String {
        let millis = nanoseconds / 1_000_000
        let secs = Int64(millis / 1000)
        let ms = Int(millis % 1000)
        let days = secs / 86_400
        let rem = Int(secs % 86_400)
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        func pad(_ v: some BinaryInteger, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(rem / 3600, 2)):\(pad(rem / 60 % 60, 2)):"
            + "\(pad(rem % 60, 2)).\(pad(ms, 3))Z"
    }
}
