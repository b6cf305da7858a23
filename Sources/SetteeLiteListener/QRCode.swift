import CQREncode
import SetteeCore

/// A QR code of a sync URL, made by libqrencode (Debian's libqrencode-dev), shown in a terminal and
/// saved as a PNG so a second device can scan the listener's one-time URL.
public struct QRCode: Sendable, Equatable {
    /// Modules, row by row; true is dark.
    public let modules: [[Bool]]
    public var size: Int { modules.count }

    public struct EncodingFailed: Error, CustomStringConvertible {
        public var description: String { "the text is too long for a QR code" }
    }

    /// Encodes `text` (8-bit mode, error correction level M).
    public init(_ text: String) throws(EncodingFailed) {
        guard let code = QRcode_encodeString8bit(text, 0, QR_ECLEVEL_M) else { throw EncodingFailed() }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        var rows: [[Bool]] = []
        rows.reserveCapacity(width)
        for y in 0..<width {
            rows.append((0..<width).map { x in code.pointee.data[y * width + x] & 1 == 1 })
        }
        modules = rows
    }

    /// The code for a terminal: two module rows per text line with Unicode half blocks, light on dark
    /// inverted so it scans on dark terminals too, with a 2-module quiet zone.
    public func terminalText() -> String {
        let border = 2
        let n = size + 2 * border
        func dark(_ x: Int, _ y: Int) -> Bool {
            let mx = x - border
            let my = y - border
            return mx >= 0 && my >= 0 && mx < size && my < size && modules[my][mx]
        }
        var out = ""
        for y in stride(from: 0, to: n, by: 2) {
            for x in 0..<n {
                // Light modules are drawn, dark ones left blank.
                switch (!dark(x, y), y + 1 < n ? !dark(x, y + 1) : false) {
                case (true, true): out += "\u{2588}"
                case (true, false): out += "\u{2580}"
                case (false, true): out += "\u{2584}"
                case (false, false): out += " "
                }
            }
            out += "\n"
        }
        return out
    }

    /// A greyscale PNG, `scale` pixels per module and a 4-module quiet zone. The image data goes in
    /// stored (uncompressed) deflate blocks: a QR code is tiny, and no zlib is needed.
    public func png(scale: Int = 8) -> [UInt8] {
        let border = 4
        let side = (size + 2 * border) * scale
        var raw: [UInt8] = []
        raw.reserveCapacity(side * (side + 1))
        for py in 0..<side {
            raw.append(0)  // filter: none
            let my = py / scale - border
            for px in 0..<side {
                let mx = px / scale - border
                let isDark = mx >= 0 && my >= 0 && mx < size && my < size && modules[my][mx]
                raw.append(isDark ? 0 : 255)
            }
        }
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        var header: [UInt8] = []
        Self.appendBE(UInt32(side), to: &header)
        Self.appendBE(UInt32(side), to: &header)
        header += [8, 0, 0, 0, 0]  // 8-bit greyscale, deflate, no filter, no interlace
        Self.chunk("IHDR", header, into: &png)
        Self.chunk("IDAT", Self.zlibStored(raw), into: &png)
        Self.chunk("IEND", [], into: &png)
        return png
    }

    private static func appendBE(_ v: UInt32, to out: inout [UInt8]) {
        out += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
    }

    private static func chunk(_ type: String, _ data: [UInt8], into out: inout [UInt8]) {
        appendBE(UInt32(data.count), to: &out)
        let typed = Array(type.utf8) + data
        out += typed
        appendBE(CRC32.checksum(typed), to: &out)
    }

    private static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let n = min(65535, data.count - offset)
            let final: UInt8 = offset + n == data.count ? 1 : 0
            out.append(final)
            out += [UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8((~n >> 8) & 0xFF)]
            out += data[offset..<offset + n]
            offset += n
        } while offset < data.count
        var a: UInt32 = 1
        var b: UInt32 = 0
        for byte in data {
            a = (a + UInt32(byte)) % 65521
            b = (b + a) % 65521
        }
        appendBE((b << 16) | a, to: &out)
        return out
    }
}
