import CompressNIO
import Foundation
import NIOCore
import SetteeCore
import SetteeJSON

/// gzip for request bodies (`Content-Encoding: gzip`) and responses (`Accept-Encoding: gzip`).
enum GzipCodec {
    /// Decodes a gzip body; 400 when corrupt, 413 when it inflates beyond `limit`.
    static func gunzip(_ bytes: [UInt8], limit: Int = GatewayHTTPLimits.maxRequestBody) throws(GatewayError) -> [UInt8]
    {
        var input = ByteBuffer(bytes: bytes)
        do {
            let out = try input.decompress(with: .gzip(), maxSize: limit)
            return Array(out.readableBytesView)
        } catch let e as CompressNIOError where e == .bufferOverflow {
            throw .status(413, "Request body exceeds \(limit) bytes once decompressed")
        } catch {
            throw .status(400, "Invalid gzip request body")
        }
    }

    /// The gzip encoding of `bytes`, nil if compression failed (the caller sends them plain).
    static func gzip(_ bytes: [UInt8]) -> [UInt8]? {
        var input = ByteBuffer(bytes: bytes)
        guard let out = try? input.compress(with: .gzip()) else { return nil }
        return Array(out.readableBytesView)
    }

    /// The gzip encoding of an answer written in pieces (`GatewayReply.streamed`). Each piece is flushed
    /// (`Z_SYNC_FLUSH`), so what the client has received so far always decodes; `end` writes the trailer.
    final class Stream {
        private let compressor = CompressionAlgorithm.gzip().compressor

        init() throws { try compressor.startStream() }

        func piece(_ bytes: [UInt8]) throws -> ByteBuffer {
            var input = ByteBuffer(bytes: bytes)
            return try input.compressStream(with: compressor, flush: .sync)
        }

        func end() throws -> ByteBuffer {
            var input = ByteBuffer()
            let out = try input.compressStream(with: compressor, flush: .finish)
            try compressor.finishStream()
            return out
        }
    }

    /// Whether an `Accept-Encoding` value admits gzip (`gzip`, `x-gzip` or `*`, without `q=0`).
    static func accepts(_ header: String?) -> Bool {
        guard let header else { return false }
        for item in header.split(separator: ",") {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let coding = parts.first, coding == "gzip" || coding == "x-gzip" || coding == "*" else { continue }
            if parts.dropFirst().contains(where: { $0.replacingOccurrences(of: " ", with: "") == "q=0" }) { continue }
            return true
        }
        return false
    }
}
