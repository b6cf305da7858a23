import CZlib

/// A `.tar.gz` built in memory: POSIX ustar entries (regular files, mode 0600, owner 0), the whole tar compressed as
/// one gzip member (zlib's `deflate` with the gzip wrapper). What `tar xzf` and every archive tool read.
///
/// Names are `prefix/name` paths of at most 100 bytes (longer ones are cut: the names are ours, never a client's).
public struct TarGzArchive: Sendable {
    public private(set) var tar: [UInt8] = []

    public init() {}

    /// Appends a regular file `name` holding `bytes`, modified at `mtime` (seconds since the epoch).
    public mutating func add(name: String, bytes: [UInt8], mtime: UInt64 = 0) {
        var header = [UInt8](repeating: 0, count: 512)
        func put(_ text: String, at offset: Int, width: Int) {
            for (i, b) in text.utf8.prefix(width).enumerated() { header[offset + i] = b }
        }
        func octal(_ value: UInt64, at offset: Int, width: Int) {
            let digits = String(value, radix: 8)
            let padded = String(repeating: "0", count: max(0, width - 1 - digits.count)) + digits
            put(padded, at: offset, width: width - 1)
        }
        put(name, at: 0, width: 100)
        octal(0o600, at: 100, width: 8)
        octal(0, at: 108, width: 8)
        octal(0, at: 116, width: 8)
        octal(UInt64(bytes.count), at: 124, width: 12)
        octal(mtime, at: 136, width: 12)
        put("        ", at: 148, width: 8)
        header[156] = UInt8(ascii: "0")
        put("ustar", at: 257, width: 6)
        put("00", at: 263, width: 2)
        put("settee", at: 265, width: 32)
        put("settee", at: 297, width: 32)
        let sum = header.reduce(0) { $0 + Int($1) }
        let digits = String(sum, radix: 8)
        put(String(repeating: "0", count: max(0, 6 - digits.count)) + digits, at: 148, width: 6)
        header[154] = 0
        header[155] = UInt8(ascii: " ")
        tar.append(contentsOf: header)
        tar.append(contentsOf: bytes)
        let pad = (512 - bytes.count % 512) % 512
        tar.append(contentsOf: repeatElement(0, count: pad))
    }

    /// The archive's bytes: the tar with its two zero end blocks, gzip-compressed. nil if zlib refused (out of
    /// memory).
    public func gzipped() -> [UInt8]? {
        var input = tar
        input.append(contentsOf: repeatElement(0, count: 1024))
        return Gzip.compress(input)
    }
}

/// gzip (RFC 1952) through the system zlib.
public enum Gzip {
    /// `input` as one gzip member at zlib's default level, or nil if zlib fails.
    public static func compress(_ input: [UInt8]) -> [UInt8]? {
        var stream = z_stream()
        // windowBits 15 + 16: zlib writes the gzip header and trailer.
        guard CZlib_deflateInit2(&stream, Z_DEFAULT_COMPRESSION, 15 + 16, 8) == Z_OK else { return nil }
        defer { deflateEnd(&stream) }
        let bound = Int(deflateBound(&stream, uLong(input.count))) + 64
        var output = [UInt8](repeating: 0, count: bound)
        let status = input.withUnsafeBufferPointer { src -> Int32 in
            output.withUnsafeMutableBufferPointer { dst -> Int32 in
                stream.next_in = UnsafeMutablePointer(mutating: src.baseAddress)
                stream.avail_in = uInt(src.count)
                stream.next_out = dst.baseAddress
                stream.avail_out = uInt(dst.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        guard status == Z_STREAM_END else { return nil }
        output.removeLast(Int(stream.avail_out))
        return output
    }
}
