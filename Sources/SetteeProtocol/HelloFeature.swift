/// HELLO (0x1f) feature codes a client may ask for.
public struct HelloFeature: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    public static let tls = HelloFeature(0x02)
    public static let tcpNoDelay = HelloFeature(0x03)
    public static let mutationSeqno = HelloFeature(0x04)
    public static let tcpDelay = HelloFeature(0x05)
    public static let xattr = HelloFeature(0x06)
    public static let xerror = HelloFeature(0x07)
    public static let selectBucket = HelloFeature(0x08)
    public static let snappy = HelloFeature(0x0a)
    public static let json = HelloFeature(0x0b)
    public static let duplex = HelloFeature(0x0c)
    public static let clustermapChangeNotification = HelloFeature(0x0d)
    public static let unorderedExecution = HelloFeature(0x0e)
    public static let tracing = HelloFeature(0x0f)
    public static let altRequestSupport = HelloFeature(0x10)
    public static let syncReplication = HelloFeature(0x11)
    public static let collections = HelloFeature(0x12)
    public static let preserveTtl = HelloFeature(0x14)
}
