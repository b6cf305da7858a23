import SetteeCore

/// Incremental RFC 2046 multipart parser: feed it the body in chunks as they arrive (a `_bulk_get`
/// answer streamed off the socket) and it returns each part as soon as its closing delimiter is seen,
/// so only the part being read is buffered.
///
/// States (in order; `epilogue` is final):
/// ```
///  preamble ──"--b"──▶ delimiterLine ──"--"──▶ epilogue
///                         │  ▲
///                      CRLF  └──── "CRLF--b" ────┐
///                         ▼                       │
///                      headers ──blank line──▶ body
/// ```
/// Invariants:
/// 1. `buffer[start...]` holds exactly the bytes not yet consumed; everything before `start` is done.
/// 2. In `body`, no delimiter begins before `scanFrom` (so each byte is scanned once, not once per chunk).
/// 3. A delimiter is `LF--boundary` at a line start (the CR before the LF, if any, is not part of the
///    body); the first one may also sit at the very start of the input. Bare-LF bodies are accepted.
public struct MultipartParser: Sendable {
    enum State: Sendable { case preamble, delimiterLine, headers, body, epilogue }

    let dashBoundary: [UInt8]
    private(set) var state = State.preamble
    private var buffer: [UInt8] = []
    private var start = 0
    private var scanFrom = 0
    private var headers: [(name: String, value: String)] = []
    private var partCount = 0

    public init(boundary: String) throws(MultipartError) {
        guard !boundary.isEmpty, boundary.utf8.count <= 200 else { throw MultipartError("bad boundary") }
        dashBoundary = Array("--\(boundary)".utf8)
    }

    /// True once the closing delimiter has been read.
    public var isComplete: Bool { state == .epilogue }

    /// Adds bytes; returns the parts completed by them.
    public mutating func feed(_ bytes: some Collection<UInt8>) throws(MultipartError) -> [MultipartPart] {
        if state == .epilogue { return [] }
        buffer.append(contentsOf: bytes)
        var out: [MultipartPart] = []
        while try step(&out) {}
        compact()
        return out
    }

    /// Ends the input: throws unless the closing delimiter was seen.
    public mutating func finish() throws(MultipartError) -> [MultipartPart] {
        guard state == .epilogue else {
            throw MultipartError(state == .preamble ? "no boundary found" : "truncated (no closing boundary)")
        }
        return []
    }

    /// Advances one state; false when more input is needed (or the epilogue is reached).
    private mutating func step(_ out: inout [MultipartPart]) throws(MultipartError) -> Bool {
        switch state {
        case .preamble:
            if buffer.count - start >= dashBoundary.count, matches(dashBoundary, at: start) {
                start += dashBoundary.count
                state = .delimiterLine
                return true
            }
            guard let at = findDelimiter(from: max(start, scanFrom)) else {
                scanFrom = max(start, buffer.count - dashBoundary.count)
                return false
            }
            start = at + 1 + dashBoundary.count
            state = .delimiterLine
            return true

        case .delimiterLine:
            // After `--boundary`: `--` closes; otherwise optional padding then the line break.
            guard buffer.count - start >= 2 else { return false }
            if buffer[start] == UInt8(ascii: "-") && buffer[start + 1] == UInt8(ascii: "-") {
                state = .epilogue
                buffer = []
                start = 0
                return false
            }
            guard let lf = indexOfLF(from: start) else {
                if buffer.count - start > ReplicationLimits.maxPartHeaderBytes {
                    throw MultipartError("delimiter line")
                }
                return false
            }
            for i in start..<lf where !(buffer[i] == 0x20 || buffer[i] == 0x09 || (buffer[i] == 0x0D && i == lf - 1)) {
                throw MultipartError("garbage after boundary")
            }
            start = lf + 1
            headers = []
            state = .headers
            return true

        case .headers:
            guard let lf = indexOfLF(from: start) else {
                if buffer.count - start > ReplicationLimits.maxPartHeaderBytes {
                    throw MultipartError("header too long")
                }
                return false
            }
            var end = lf
            if end > start && buffer[end - 1] == 0x0D { end -= 1 }
            if end == start {
                start = lf + 1
                scanFrom = lf  // an empty body may end right at the blank line's LF
                state = .body
                return true
            }
            // A folded continuation line (RFC 5322 §2.2.3) needs the next line's first byte to be known.
            let line = String(decoding: buffer[start..<end], as: UTF8.self)
            if buffer[start] == 0x20 || buffer[start] == 0x09 {
                guard !headers.isEmpty else { throw MultipartError("continuation before any header") }
                headers[headers.count - 1].value += " " + line.trimmed
            } else {
                guard let colon = line.firstIndex(of: ":") else { throw MultipartError("header without colon") }
                headers.append((String(line[..<colon]).trimmed, String(line[line.index(after: colon)...]).trimmed))
            }
            if headers.count > 100 { throw MultipartError("too many part headers") }
            start = lf + 1
            return true

        case .body:
            guard let at = findDelimiter(from: max(start - 1, scanFrom)) else {
                scanFrom = max(start - 1, buffer.count - dashBoundary.count)
                return false
            }
            var end = at
            if end > start && buffer[end - 1] == 0x0D { end -= 1 }
            partCount += 1
            if partCount > ReplicationLimits.maxMultipartParts { throw MultipartError("too many parts") }
            out.append(MultipartPart(headers: headers, body: at < start ? [] : Array(buffer[start..<end])))
            start = at + 1 + dashBoundary.count
            state = .delimiterLine
            return true

        case .epilogue:
            return false
        }
    }

    /// Index of an LF followed by `--boundary`, searching from `from`; nil when not (yet) present.
    private func findDelimiter(from: Int) -> Int? {
        let need = dashBoundary.count
        return buffer.withUnsafeBufferPointer { buf -> Int? in
            dashBoundary.withUnsafeBufferPointer { pattern -> Int? in
                var i = from
                let last = buf.count - need - 1
                guard i <= last else { return nil }
                let first = pattern[0]
                while i <= last {
                    if buf[i] == 0x0A && buf[i + 1] == first {
                        var j = 1
                        while j < need && buf[i + 1 + j] == pattern[j] { j += 1 }
                        if j == need { return i }
                    }
                    i += 1
                }
                return nil
            }
        }
    }

    private func indexOfLF(from: Int) -> Int? {
        buffer.withUnsafeBufferPointer { buf -> Int? in
            var i = from
            while i < buf.count {
                if buf[i] == 0x0A { return i }
                i += 1
            }
            return nil
        }
    }

    private func matches(_ pattern: [UInt8], at index: Int) -> Bool {
        guard index + pattern.count <= buffer.count else { return false }
        for k in 0..<pattern.count where buffer[index + k] != pattern[k] { return false }
        return true
    }

    /// Drops consumed bytes once they are most of the buffer (amortised O(1) per byte). One byte before
    /// `start` is kept so a body's delimiter search can still see the LF that ended the header block.
    private mutating func compact() {
        let keep = max(0, start - 1)
        guard keep > 4096, keep * 2 > buffer.count else { return }
        buffer.removeFirst(keep)
        start -= keep
        scanFrom = max(0, scanFrom - keep)
    }
}
