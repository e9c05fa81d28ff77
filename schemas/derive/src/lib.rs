//! `#[derive(Snapshot)]` and `#[derive(Wire)]` for `snapbus-schemas`. See that crate's docs;
//! this crate is an implementation detail re-exported there.
//!
//! Attributes:
//! - container: `#[snapshot(id = "a.b.c", version = N)]` (required for `Snapshot`),
//!   `#[snapshot(crate = "path::to::snapbus_schemas")]` when the crate is re-exported;
//! - root fields of a `Snapshot`: `#[snapshot(since = N)]` for fields appended in version N,
//!   with an optional `default = expr` (otherwise `Default::default()`).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Error, Expr, Fields, Ident, LitInt, LitStr, Path, Type};

/// Derives `Wire`, `ToValue` and `Snapshot`: a schema id, a version, a type descriptor, the
/// wire codec, the dynamic view and versioned decoding for a struct with named fields.
#[proc_macro_derive(Snapshot, attributes(snapshot))]
pub fn derive_snapshot(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input, true)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// Derives `Wire` (descriptor + codec) and `ToValue` (dynamic view) for a struct or enum used
/// inside snapshots.
#[proc_macro_derive(Wire, attributes(snapshot))]
pub fn derive_wire(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input, false)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

#[derive(Default)]
struct ContainerAttrs {
    id: Option<LitStr>,
    version: Option<(u32, Span)>,
    krate: Option<Path>,
}

#[derive(Default)]
struct FieldAttrs {
    since: Option<(u32, Span)>,
    default: Option<Expr>,
}

fn container_attrs(input: &DeriveInput) -> syn::Result<ContainerAttrs> {
    let mut out = ContainerAttrs::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("snapshot")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("id") {
                out.id = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("version") {
                let lit: LitInt = meta.value()?.parse()?;
                out.version = Some((lit.base10_parse()?, lit.span()));
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                out.krate = Some(lit.parse()?);
            } else {
                return Err(meta.error("expected `id`, `version` or `crate`"));
            }
            Ok(())
        })?;
    }
    Ok(out)
}

fn field_attrs(field: &syn::Field) -> syn::Result<FieldAttrs> {
    let mut out = FieldAttrs::default();
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("snapshot")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("since") {
                let lit: LitInt = meta.value()?.parse()?;
                out.since = Some((lit.base10_parse()?, lit.span()));
            } else if meta.path.is_ident("default") {
                out.default = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error("expected `since` or `default`"));
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// Same rule as `snapbus_schemas::validate_schema_id`.
fn valid_schema_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 256
        && id.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

fn field_name(ident: &Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map(str::to_owned).unwrap_or(s)
}

struct NamedField<'a> {
    ident: &'a Ident,
    name: String,
    ty: &'a Type,
    attrs: FieldAttrs,
}

fn expand(input: &DeriveInput, snapshot: bool) -> syn::Result<TokenStream2> {
    if !input.generics.params.is_empty() {
        return Err(Error::new(
            input.generics.span(),
            "snapbus schemas cannot be generic: a schema has one fixed layout",
        ));
    }
    let attrs = container_attrs(input)?;
    let krate = attrs
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::snapbus_schemas));
    let name = &input.ident;

    let wire = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => {
                let fields = named
                    .named
                    .iter()
                    .map(|f| {
                        let ident = f
                            .ident
                            .as_ref()
                            .ok_or_else(|| Error::new(f.span(), "unnamed field"))?;
                        Ok(NamedField {
                            ident,
                            name: field_name(ident),
                            ty: &f.ty,
                            attrs: field_attrs(f)?,
                        })
                    })
                    .collect::<syn::Result<Vec<_>>>()?;
                let wire = named_struct_wire(&krate, name, &fields);
                if snapshot {
                    let snap = snapshot_impl(&krate, input, &attrs, &fields)?;
                    return Ok(quote! { #wire #snap });
                }
                reject_field_attrs(&fields)?;
                wire
            }
            Fields::Unnamed(unnamed) => {
                for f in &unnamed.unnamed {
                    if f.attrs.iter().any(|a| a.path().is_ident("snapshot")) {
                        return Err(Error::new(
                            f.span(),
                            "field attributes only apply to named fields of a Snapshot",
                        ));
                    }
                }
                let tys: Vec<&Type> = unnamed.unnamed.iter().map(|f| &f.ty).collect();
                tuple_struct_wire(&krate, name, &tys, false)
            }
            Fields::Unit => tuple_struct_wire(&krate, name, &[], true),
        },
        Data::Enum(e) => enum_wire(&krate, name, e)?,
        Data::Union(u) => {
            return Err(Error::new(
                u.union_token.span(),
                "unions cannot be snapbus schemas",
            ));
        }
    };
    if snapshot {
        return Err(Error::new(
            name.span(),
            "#[derive(Snapshot)] needs a struct with named fields; use #[derive(Wire)] for nested types",
        ));
    }
    if attrs.id.is_some() || attrs.version.is_some() {
        return Err(Error::new(
            name.span(),
            "`id` and `version` belong on #[derive(Snapshot)] types",
        ));
    }
    Ok(wire)
}

fn reject_field_attrs(fields: &[NamedField<'_>]) -> syn::Result<()> {
    for f in fields {
        if let Some((_, span)) = f.attrs.since {
            return Err(Error::new(
                span,
                "`since` only applies to the fields of a #[derive(Snapshot)] root struct",
            ));
        }
        if let Some(d) = &f.attrs.default {
            return Err(Error::new(
                d.span(),
                "`default` only applies to the fields of a #[derive(Snapshot)] root struct",
            ));
        }
    }
    Ok(())
}

fn since_of(f: &NamedField<'_>) -> u32 {
    f.attrs.since.map_or(1, |(v, _)| v)
}

fn named_struct_wire(krate: &Path, name: &Ident, fields: &[NamedField<'_>]) -> TokenStream2 {
    let idents: Vec<&Ident> = fields.iter().map(|f| f.ident).collect();
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    let tys: Vec<&Type> = fields.iter().map(|f| f.ty).collect();
    let sinces: Vec<u32> = fields.iter().map(since_of).collect();
    quote! {
        impl #krate::Wire for #name {
            const MIN_ENCODED_LEN: usize = 0 #(+ <#tys as #krate::Wire>::MIN_ENCODED_LEN)*;
            fn type_desc() -> #krate::TypeDesc {
                #krate::TypeDesc::Struct {
                    fields: ::std::vec![#(
                        #krate::Field::since(#names, <#tys as #krate::Wire>::type_desc(), #sinces)
                    ),*],
                }
            }
            #[inline]
            fn encoded_len(&self) -> usize {
                0 #(+ #krate::Wire::encoded_len(&self.#idents))*
            }
            #[inline]
            fn encode(&self, w: &mut #krate::WireWriter<'_>) {
                #(#krate::Wire::encode(&self.#idents, w);)*
            }
            fn decode(r: &mut #krate::WireReader<'_>) -> ::std::result::Result<Self, #krate::DecodeError> {
                ::std::result::Result::Ok(Self {
                    #(#idents: <#tys as #krate::Wire>::decode(r).map_err(|e| e.in_field(#names))?,)*
                })
            }
        }
        impl #krate::ToValue for #name {
            fn to_value(&self) -> #krate::Value<'_> {
                #krate::Value::Struct(::std::vec![#(
                    (::std::borrow::Cow::Borrowed(#names), #krate::ToValue::to_value(&self.#idents))
                ),*])
            }
        }
    }
}

fn tuple_struct_wire(krate: &Path, name: &Ident, tys: &[&Type], unit: bool) -> TokenStream2 {
    let construct = if unit {
        quote! { Self }
    } else {
        let names: Vec<String> = (0..tys.len()).map(|i| i.to_string()).collect();
        quote! { Self(#(<#tys as #krate::Wire>::decode(r).map_err(|e| e.in_field(#names))?,)*) }
    };
    let idx: Vec<syn::Index> = (0..tys.len()).map(syn::Index::from).collect();
    quote! {
        impl #krate::Wire for #name {
            const MIN_ENCODED_LEN: usize = 0 #(+ <#tys as #krate::Wire>::MIN_ENCODED_LEN)*;
            fn type_desc() -> #krate::TypeDesc {
                #krate::TypeDesc::Tuple {
                    elems: ::std::vec![#(<#tys as #krate::Wire>::type_desc()),*],
                }
            }
            #[inline]
            fn encoded_len(&self) -> usize {
                0 #(+ #krate::Wire::encoded_len(&self.#idx))*
            }
            #[inline]
            fn encode(&self, w: &mut #krate::WireWriter<'_>) {
                let _ = w;
                #(#krate::Wire::encode(&self.#idx, w);)*
            }
            fn decode(r: &mut #krate::WireReader<'_>) -> ::std::result::Result<Self, #krate::DecodeError> {
                let _ = &r;
                ::std::result::Result::Ok(#construct)
            }
        }
        impl #krate::ToValue for #name {
            fn to_value(&self) -> #krate::Value<'_> {
                #krate::Value::Seq(::std::vec![#(#krate::ToValue::to_value(&self.#idx)),*])
            }
        }
    }
}

/// The match arms one enum variant contributes to each generated item.
struct VariantArms {
    desc: TokenStream2,
    len: TokenStream2,
    encode: TokenStream2,
    decode: TokenStream2,
    value: TokenStream2,
}

fn variant_arms(krate: &Path, index: u32, v: &syn::Variant) -> syn::Result<VariantArms> {
    let vident = &v.ident;
    let vname = field_name(vident);
    for f in &v.fields {
        if f.attrs.iter().any(|a| a.path().is_ident("snapshot")) {
            return Err(Error::new(
                f.span(),
                "field attributes do not apply to enum variants",
            ));
        }
    }
    let variant_value = |payload: TokenStream2| {
        quote! {
            #krate::Value::Variant {
                index: #index,
                name: ::std::borrow::Cow::Borrowed(#vname),
                value: ::std::boxed::Box::new(#payload),
            }
        }
    };
    Ok(match &v.fields {
        Fields::Unit => {
            let value = variant_value(quote! { #krate::Value::Unit });
            VariantArms {
                desc: quote! { #krate::Variant::unit(#vname) },
                len: quote! { Self::#vident => 0 },
                encode: quote! { Self::#vident => w.put(&#index.to_le_bytes()) },
                decode: quote! { #index => ::std::result::Result::Ok(Self::#vident) },
                value: quote! { Self::#vident => #value },
            }
        }
        Fields::Unnamed(u) => {
            let tys: Vec<&Type> = u.unnamed.iter().map(|f| &f.ty).collect();
            let binds: Vec<Ident> = (0..tys.len()).map(|j| format_ident!("f{}", j)).collect();
            let paths: Vec<String> = (0..tys.len()).map(|j| format!("{vname}.{j}")).collect();
            let value = variant_value(quote! {
                #krate::Value::Seq(::std::vec![#(#krate::ToValue::to_value(#binds)),*])
            });
            VariantArms {
                desc: quote! {
                    #krate::Variant::tuple(#vname, ::std::vec![#(<#tys as #krate::Wire>::type_desc()),*])
                },
                len: quote! { Self::#vident(#(#binds),*) => 0 #(+ #krate::Wire::encoded_len(#binds))* },
                encode: quote! {
                    Self::#vident(#(#binds),*) => {
                        w.put(&#index.to_le_bytes());
                        #(#krate::Wire::encode(#binds, w);)*
                    }
                },
                decode: quote! {
                    #index => ::std::result::Result::Ok(Self::#vident(
                        #(<#tys as #krate::Wire>::decode(r).map_err(|e| e.in_field(#paths))?),*
                    ))
                },
                value: quote! { Self::#vident(#(#binds),*) => #value },
            }
        }
        Fields::Named(n) => {
            let idents: Vec<&Ident> = n.named.iter().filter_map(|f| f.ident.as_ref()).collect();
            let names: Vec<String> = idents.iter().map(|i| field_name(i)).collect();
            let paths: Vec<String> = names.iter().map(|f| format!("{vname}.{f}")).collect();
            let tys: Vec<&Type> = n.named.iter().map(|f| &f.ty).collect();
            let value = variant_value(quote! {
                #krate::Value::Struct(::std::vec![#(
                    (::std::borrow::Cow::Borrowed(#names), #krate::ToValue::to_value(#idents))
                ),*])
            });
            VariantArms {
                desc: quote! {
                    #krate::Variant::structure(#vname, ::std::vec![#(
                        #krate::Field::new(#names, <#tys as #krate::Wire>::type_desc())
                    ),*])
                },
                len: quote! { Self::#vident { #(#idents),* } => 0 #(+ #krate::Wire::encoded_len(#idents))* },
                encode: quote! {
                    Self::#vident { #(#idents),* } => {
                        w.put(&#index.to_le_bytes());
                        #(#krate::Wire::encode(#idents, w);)*
                    }
                },
                decode: quote! {
                    #index => ::std::result::Result::Ok(Self::#vident {
                        #(#idents: <#tys as #krate::Wire>::decode(r).map_err(|e| e.in_field(#paths))?,)*
                    })
                },
                value: quote! { Self::#vident { #(#idents),* } => #value },
            }
        }
    })
}

fn enum_wire(krate: &Path, name: &Ident, e: &syn::DataEnum) -> syn::Result<TokenStream2> {
    if e.variants.len() > u32::MAX as usize {
        return Err(Error::new(name.span(), "too many variants"));
    }
    let arms = e
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| variant_arms(krate, i as u32, v))
        .collect::<syn::Result<Vec<_>>>()?;
    let descs = arms.iter().map(|a| &a.desc);
    let lens = arms.iter().map(|a| &a.len);
    let encodes = arms.iter().map(|a| &a.encode);
    let decodes = arms.iter().map(|a| &a.decode);
    let values = arms.iter().map(|a| &a.value);
    let count = e.variants.len();
    let body_len = if count == 0 {
        quote! { match *self {} }
    } else {
        quote! { 4 + match self { #(#lens,)* } }
    };
    let body_encode = if count == 0 {
        quote! { let _ = w; match *self {} }
    } else {
        quote! { match self { #(#encodes,)* } }
    };
    let body_value = if count == 0 {
        quote! { match *self {} }
    } else {
        quote! { match self { #(#values,)* } }
    };
    Ok(quote! {
        impl #krate::Wire for #name {
            const MIN_ENCODED_LEN: usize = 4;
            fn type_desc() -> #krate::TypeDesc {
                #krate::TypeDesc::Enum { variants: ::std::vec![#(#descs),*] }
            }
            fn encoded_len(&self) -> usize {
                #body_len
            }
            fn encode(&self, w: &mut #krate::WireWriter<'_>) {
                #body_encode
            }
            fn decode(r: &mut #krate::WireReader<'_>) -> ::std::result::Result<Self, #krate::DecodeError> {
                let at = r.offset();
                let index = r.read_u32()?;
                match index {
                    #(#decodes,)*
                    _ => ::std::result::Result::Err(#krate::DecodeError::new(
                        at,
                        #krate::DecodeErrorKind::InvalidVariant { index, count: #count },
                    )),
                }
            }
        }
        impl #krate::ToValue for #name {
            fn to_value(&self) -> #krate::Value<'_> {
                #body_value
            }
        }
    })
}

fn snapshot_impl(
    krate: &Path,
    input: &DeriveInput,
    attrs: &ContainerAttrs,
    fields: &[NamedField<'_>],
) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let id = attrs.id.as_ref().ok_or_else(|| {
        Error::new(
            name.span(),
            "#[derive(Snapshot)] needs #[snapshot(id = \"my.schema.id\", version = 1)]",
        )
    })?;
    if !valid_schema_id(&id.value()) {
        return Err(Error::new(
            id.span(),
            "invalid schema id: use dot-separated segments of letters, digits, '_' and '-' (e.g. \"monty.env_interface.step\")",
        ));
    }
    let (version, vspan) = attrs.version.ok_or_else(|| {
        Error::new(
            name.span(),
            "#[derive(Snapshot)] needs `version = N` in #[snapshot(...)]",
        )
    })?;
    if version == 0 {
        return Err(Error::new(vspan, "schema versions start at 1"));
    }
    let mut prev = 1;
    for f in fields {
        if let Some((since, span)) = f.attrs.since {
            if since == 0 || since > version {
                return Err(Error::new(
                    span,
                    format!("`since` must be between 1 and the schema version {version}"),
                ));
            }
            if since < prev {
                return Err(Error::new(
                    span,
                    "fields can only be appended: `since` must not decrease down the struct",
                ));
            }
            prev = since;
        } else if prev > 1 {
            return Err(Error::new(
                f.ident.span(),
                "fields after a `since` field must have a `since` too (fields can only be appended)",
            ));
        }
        if f.attrs.default.is_some() && f.attrs.since.is_none() {
            return Err(Error::new(
                f.ident.span(),
                "`default` is only used for fields with `since`",
            ));
        }
    }
    let inits = fields.iter().map(|f| {
        let ident = f.ident;
        let fname = &f.name;
        let ty = f.ty;
        let read = quote! { <#ty as #krate::Wire>::decode(r).map_err(|e| e.in_field(#fname))? };
        let since = since_of(f);
        if since <= 1 {
            quote! { #ident: #read }
        } else {
            let default = f.attrs.default.as_ref().map_or_else(
                || quote! { ::std::default::Default::default() },
                |d| quote! { #d },
            );
            quote! { #ident: if writer_version >= #since { #read } else { #default } }
        }
    });
    Ok(quote! {
        impl #krate::Snapshot for #name {
            const SCHEMA_ID: &'static str = #id;
            const VERSION: u32 = #version;
            fn descriptor() -> &'static #krate::SchemaDescriptor {
                static DESCRIPTOR: ::std::sync::OnceLock<#krate::SchemaDescriptor> =
                    ::std::sync::OnceLock::new();
                DESCRIPTOR.get_or_init(#krate::__private::descriptor_of::<Self>)
            }
            fn decode_fields_of(
                r: &mut #krate::WireReader<'_>,
                writer_version: u32,
            ) -> ::std::result::Result<Self, #krate::DecodeError> {
                let _ = writer_version;
                ::std::result::Result::Ok(Self { #(#inits,)* })
            }
        }
    })
}
