import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A listening socket on 127.0.0.1 with a small receive buffer (`SO_RCVBUF`, which also stops the kernel growing it,
/// so a client cannot hand over megabytes the peer has not read: loopback's buffers otherwise take tens of MiB): the
/// descriptor and its port, 0 if it could not listen.
private func smallBufferListener(backlog: Int32) -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var small: Int32 = 16 * 1024
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && listen(fd, backlog) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    return (fd, bound ? Int(UInt16(bigEndian: address.sin_port)) : 0)
}

/// A request's head read from `connection` a byte at a time (it is small), and its `Content-Length`; nil if the
/// connection ended first or the head has none.
private func contentLength(_ connection: Int32) -> Int? {
    var head: [UInt8] = []
    var byte: UInt8 = 0
    while !head.suffix(4).elementsEqual([13, 10, 13, 10]) {
        guard read(connection, &byte, 1) == 1 else { return nil }
        head.append(byte)
    }
    let text = String(decoding: head, as: UTF8.self).lowercased()
    guard let line = text.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }) else { return nil }
    return Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
}

/// Reads `total` bytes of body from `connection`, calling `progress` with the count so far; false if it ended first.
/// With `bytesPerSecond`, it reads 4 KiB at a time and sleeps to keep to that rate: a slow link.
private func readBody(
    _ connection: Int32, _ total: Int, bytesPerSecond: Int? = nil, progress: (Int) -> Void = { _ in }
) -> Bool {
    var buffer = [UInt8](repeating: 0, count: bytesPerSecond == nil ? 64 * 1024 : 4 * 1024)
    var got = 0
    let start = ContinuousClock.now
    while got < total {
        let n = read(connection, &buffer, min(buffer.count, total - got))
        guard n > 0 else { return false }
        got += n
        progress(got)
        if let rate = bytesPerSecond {
            let due = start + .seconds(Double(got) / Double(max(1, rate)))
            let (seconds, attoseconds) = (due - .now).components
            if seconds >= 0, due > .now { usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000)) }
        }
    }
    return true
}

/// Writes `text` whole (a small answer) to `connection`.
private func answer(_ connection: Int32, _ text: String) {
    let bytes = Array(text.utf8)
    _ = bytes.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
}

private let created201 =
    "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]"

/// A peer on 127.0.0.1 that takes one request and reads nothing of its body for `pauseMs`, then all of it (at
/// `bytesPerSecond` if given), then answers 201 `[]`: a slow or stalled link. Its receive buffer is small
/// (`smallBufferListener`), so a client cannot hand over a body of megabytes before the peer reads. A blocking
/// thread, not a task: it sleeps.
final class SlowReadingPeer: Sendable {
    /// The port it listens on, 0 if it could not listen.
    let port: Int
    /// Bytes of the body read.
    let bodyBytes = Mutex(0)
    private let listener: Int32

    init(pauseMs: Int, bytesPerSecond: Int? = nil) {
        (listener, port) = smallBufferListener(backlog: 4)
        guard port > 0 else { return }
        Thread.detachNewThread { [self] in serve(pauseMs: pauseMs, bytesPerSecond: bytesPerSecond) }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(pauseMs: Int, bytesPerSecond: Int?) {
        let connection = accept(listener, nil, nil)
        guard connection >= 0 else { return }
        defer { close(connection) }
        guard let total = contentLength(connection) else { return }
        usleep(UInt32(pauseMs * 1000))
        let progress = { (got: Int) in self.bodyBytes.withLock { $0 = got } }
        guard readBody(connection, total, bytesPerSecond: bytesPerSecond, progress: progress) else { return }
        answer(connection, created201)
    }
}

/// A peer on 127.0.0.1 that answers a request whose body is longer than `maxBodyBytes` with 413 as soon as it has
/// read the head, reads none of the body and closes, as a server with a request size bound may (CouchDB's
/// `max_http_request_size`); a smaller body it reads whole and answers 201 `[]`. One connection at a time, each
/// closed after its answer; its receive buffer is small, so a large body is still being sent when it closes.
final class EarlyRefusingPeer: Sendable {
    let port: Int
    /// The body length of every request, in order.
    let lengths = Mutex<[Int]>([])
    private let listener: Int32

    init(maxBodyBytes: Int) {
        (listener, port) = smallBufferListener(backlog: 16)
        guard port > 0 else { return }
        Thread.detachNewThread { [self] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                serve(connection, maxBodyBytes: maxBodyBytes)
                close(connection)
            }
        }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ connection: Int32, maxBodyBytes: Int) {
        guard let total = contentLength(connection) else { return }
        lengths.withLock { $0.append(total) }
        if total > maxBodyBytes {
            let body = #"{"error":"too_large","reason":"the request entity is too large"}"#
            answer(
                connection,
                "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nContent-Length: "
                    + "\(body.utf8.count)\r\nConnection: close\r\n\r\n" + body)
            return
        }
        guard readBody(connection, total) else { return }
        answer(connection, created201)
    }
}
