"""PLACEHOLDER (skeleton): dataclass -> schema mapping."""

Tensor = TelemetryEvent = f32 = f64 = i8 = i16 = i32 = i64 = u8 = u16 = u32 = u64 = None


def schema_of(cls: type) -> None:
    raise NotImplementedError
