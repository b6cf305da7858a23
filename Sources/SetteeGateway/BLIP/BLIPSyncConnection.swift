import HummingbirdWebSocket
import NIOCore
import NIOWebSocket
import SetteeBLIP
import SetteeCore

/// Carries one `/_blipsync` WebSocket between the client and its `BLIPSyncHandler` through SetteeBLIP's session
/// driver (`BLIPSession`: frames, deflate, checksums, ACK flow control): each inbound binary WebSocket message is one
/// BLIP frame for the session, each frame the session produces goes out as one binary message. When the session
/// ends (the client closed, a protocol violation, a transport failure) the socket is closed with the session's code
/// and the handler's feed is stopped. Text messages are not BLIP and are ignored.
enum BLIPSyncConnection {
    static func serve(
        handler: BLIPSyncHandler, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter
    ) async throws {
        let bytes = handler.primary.replicationBytes
        let session = BLIPSession(handler: handler) { frame in
            bytes.sent(frame.count)
            try await outbound.write(.binary(ByteBuffer(bytes: frame)))
        }
        let frames = inbound.messages(maxSize: Limits.blipMaxFrameBytes).compactMap { @Sendable message -> [UInt8]? in
            if case .binary(let buffer) = message {
                bytes.received(buffer.readableBytes)
                return Array(buffer.readableBytesView)
            }
            return nil
        }
        let end = await session.run(inbound: frames)
        handler.close()
        handler.logClosed(code: end.closeCode, reason: end.reason)
        try? await outbound.close(.init(codeNumber: Int(end.closeCode)), reason: end.reason)
    }
}
