import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import Synchronization

/// One ordinary request's answer, collected through AsyncHTTPClient's delegate API, which says when each piece of a
/// request's body has been written to the socket (`didSendRequestPart`): the async API takes a body's pieces as fast
/// as they are offered and tells nothing of their writing, so an upload's progress could not be seen, only guessed
/// at a rate (ADR 0112). Each piece written, the head and each piece of the answer's body count as the peer heard
/// from (`IdleTimeout.Watch`), so a slow link carries an upload of any size while it moves, and a stalled one is
/// silence. The answer's body is held up to `maxBytes` (`NIOTooManyBytesError` past it).
final class AnswerCollector: HTTPClientResponseDelegate {
    struct Answer: Sendable {
        var head: HTTPResponseHead
        var body: ByteBuffer
    }
    typealias Response = Answer

    private let watch: IdleTimeout.Watch
    private let maxBytes: Int
    /// The head once it came and the body so far; AsyncHTTPClient calls a delegate on one event loop at a time.
    private let state = Mutex<(head: HTTPResponseHead?, body: ByteBuffer)>((nil, ByteBuffer()))

    init(watch: IdleTimeout.Watch, maxBytes: Int) {
        self.watch = watch
        self.maxBytes = maxBytes
    }

    /// `body` as a request body written `pieceBytes` at a time, each piece after the one before was taken (so the
    /// connection's backpressure holds the rest back), each write scheduled on the event loop rather than nested in
    /// the one before, so a large body does not recurse.
    static func body(_ body: ByteBuffer, pieceBytes: Int) -> HTTPClient.Body {
        let pieceBytes = max(1, pieceBytes)
        return .stream(contentLength: Int64(body.readableBytes)) { writer in
            @Sendable func write(from start: ByteBuffer) -> EventLoopFuture<Void> {
                var rest = start
                let piece = rest.readSlice(length: min(pieceBytes, rest.readableBytes)) ?? ByteBuffer()
                let taken = writer.write(.byteBuffer(piece))
                guard rest.readableBytes > 0 else { return taken }
                let next = rest
                return taken.flatMap { taken.eventLoop.flatSubmit { write(from: next) } }
            }
            return write(from: body)
        }
    }

    func didSendRequestPart(task: HTTPClient.Task<Answer>, _ part: IOData) { watch.heard() }

    func didReceiveHead(task: HTTPClient.Task<Answer>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        watch.heard()
        state.withLock { $0.head = head }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Answer>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        watch.heard()
        let fits = state.withLock { state -> Bool in
            guard buffer.readableBytes <= maxBytes - state.body.readableBytes else { return false }
            state.body.writeImmutableBuffer(buffer)
            return true
        }
        guard fits else { return task.eventLoop.makeFailedFuture(NIOTooManyBytesError(maxBytes: maxBytes)) }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<Answer>) throws -> Answer {
        try state.withLock { state in
            guard let head = state.head else { throw HTTPClientError.remoteConnectionClosed }
            return Answer(head: head, body: state.body)
        }
    }
}
