
BgammaJ 92=9_;O:±;d<t;.9:—:¥=z<p:N:e: